#include "server/engine/segment.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace zoom::server {

absl::StatusOr<std::shared_ptr<Segment>> Segment::Open(
    const std::string& dir, const std::string& vectors_file, uint32_t space, bool create,
    const CollectionConfig& config, const storage::VectorStoreOptions& store_options,
    const EngineOptions& engine_options, const storage::MetadataStore& metadata) {
  auto seg = std::make_shared<Segment>();
  seg->space = space;
  seg->vectors_file = vectors_file;
  const std::string path = (std::filesystem::path(dir) / vectors_file).string();
  std::unique_ptr<storage::VectorStore> store;
  if (create) {
    ZOOM_ASSIGN_OR_RETURN(store, storage::VectorStore::Create(path, config.dim, config.dtype,
                                                              store_options));
  } else {
    ZOOM_ASSIGN_OR_RETURN(store, storage::VectorStore::Open(path, store_options));
    if (store->dim() != config.dim || store->dtype() != config.dtype) {
      return absl::DataLossError(absl::StrCat("vector file ", path,
                                              " does not match the collection's dim/dtype"));
    }
  }
  const uint64_t count = store->count();
  if (create) {
    seg->ids.Reserve(count);
    seg->ids.Publish(count);
  } else {
    uint64_t beyond = 0;
    ZOOM_RETURN_IF_ERROR(seg->ids.Load(
        count, [&](const auto& fn) { return metadata.ScanRecords(space, fn); }, &beyond));
    if (beyond > 0) {
      ZOOM_LOG(WARNING, "collection ", config.name, ": ", beyond,
               " records past the vector file's end ignored");
    }
  }
  seg->engine = std::make_unique<SearchEngine>(config.metric, std::move(store), nullptr,
                                               engine_options);
  return seg;
}

}  // namespace zoom::server
