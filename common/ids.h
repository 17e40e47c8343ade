// File: common/ids.h
//
// Identifiers. Below the API every vector is a dense InternalId (0, 1, 2, ...)
// that indexes arrays, graph links and file offsets; the user's ExternalId
// lives only at the edge (the metadata store maps one to the other).
#ifndef ZOOM_COMMON_IDS_H_
#define ZOOM_COMMON_IDS_H_

#include <cstdint>
#include <limits>

namespace zoom {

using InternalId = uint32_t;
using ExternalId = uint64_t;

inline constexpr InternalId kInvalidInternalId =
    std::numeric_limits<InternalId>::max();
// The largest number of vectors one collection can address.
inline constexpr uint64_t kMaxInternalIds = kInvalidInternalId;

}  // namespace zoom

#endif  // ZOOM_COMMON_IDS_H_
