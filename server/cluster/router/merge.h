// File: server/cluster/router/merge.h
//
// The shards' answers of a clustered collection as one answer, over the
// API's types (faiss's merge_knn_results over its own arrays; no protos):
//   MergeSearch  top k of every shard's hits by score (the metric's order,
//                ties by id), their stats merged (QueryStats::MergeParallel;
//                exact only when every shard that found hits ran exact),
//                the warning of the first shard that has one
//   MergeInfo    one collection's info from each shard's: counts and bytes
//                summed, the least ready shard's index state, a field
//                index's points and bytes summed (ready when every shard's
//                is), the first shard's calibration and default target
//   MergeScroll  each shard's page from the offset merged by id, cut at the
//                lowest next_offset of a shard that stopped early, at the
//                limit and at `max_bytes`
#ifndef ZOOM_SERVER_CLUSTER_ROUTER_MERGE_H_
#define ZOOM_SERVER_CLUSTER_ROUTER_MERGE_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "common/metric.h"
#include "server/api/types.h"
#include "server/cluster/cluster_map.h"

namespace zoom::server::router {

// `parts`: the answers of the shards that answered (of `shards`).
api::SearchAnswer MergeSearch(Metric metric, uint32_t k, std::vector<api::SearchAnswer> parts,
                              uint32_t shards);

// `parts`: (shard, its replica's info), every shard once.
api::CollectionDescription MergeInfo(
    const cluster::ShardMap& m, std::vector<std::pair<uint32_t, api::CollectionDescription>> parts,
    double default_target);

// The map's own description (its spec, no counts): what a router says
// before the shards answer. `default_target`: the server's
// (CollectionConfig::DefaultTarget).
api::CollectionDescription DescribeMap(const cluster::ShardMap& m, double default_target);

api::ScrollAnswer MergeScroll(std::vector<api::ScrollAnswer> parts, uint32_t limit,
                              uint64_t max_bytes);

}  // namespace zoom::server::router

#endif  // ZOOM_SERVER_CLUSTER_ROUTER_MERGE_H_
