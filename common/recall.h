// File: common/recall.h
//
// The tie-aware recall zoombench and zoomload score every answer with, over
// a Dataset (common/vector_dataset.h): one definition, so that a recall
// measured in process and one measured over the wire compare.
//
// Tie-aware: data sets hold exact duplicates and equidistant points, so an
// answer that returns another point at the k-th score is as good as the
// one the ground truth happens to list; counting the ground truth's ids
// alone would call it a miss.
#ifndef ZOOM_COMMON_RECALL_H_
#define ZOOM_COMMON_RECALL_H_

#include <cstddef>
#include <cstdint>

#include "common/vector_dataset.h"

namespace zoom {

// The exact score of base row `id` for query `q` under ds.metric, in double:
// squared L2, inner product, or cosine similarity (0 when either vector is
// zero). REQUIRES: q < ds.queries.rows, id < ds.base.rows.
double TrueScore(const Dataset& ds, size_t q, size_t id);

// Recall@k of query q's answer ids[0..n_ids) (best first; -1 = none). Only
// the first min(n_ids, k) ids count, each once; an id counts when its
// TrueScore is at least as good as gt_dist[q][k - 1], within a 1e-6
// relative tolerance (the stored scores are float32 roundings); ids outside
// the base never count. Returns hits / k; NaN when k == 0, the ground truth
// has fewer than k columns, or q is past its rows.
double RecallAtK(const Dataset& ds, size_t q, const int64_t* ids, size_t n_ids, size_t k);

}  // namespace zoom

#endif  // ZOOM_COMMON_RECALL_H_
