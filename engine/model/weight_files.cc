#include "engine/model/weight_files.h"

#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/util/read_file.h"
#include "engine/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace flatstate {

absl::StatusOr<std::map<std::string, std::vector<std::string>>> ParseWeightIndex(
    absl::string_view text, absl::string_view path) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", why));
  };
  const nlohmann::json j =
      nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  auto map_it = j.find("weight_map");
  if (map_it == j.end() || !map_it->is_object() || map_it->empty()) {
    return bad("'weight_map' is missing or not a non-empty object of tensor name -> file");
  }
  std::map<std::string, std::vector<std::string>> by_file;
  for (auto it = map_it->begin(); it != map_it->end(); ++it) {
    if (!it->is_string()) return bad(absl::StrCat("weight_map['", it.key(), "'] is not a string"));
    const std::string file = it->get<std::string>();
    if (file.empty() || absl::StrContains(file, "/") || file == "." || file == "..") {
      return bad(absl::StrCat("weight_map['", it.key(), "'] = '", file,
                              "' is not a file name in the model folder"));
    }
    by_file[file].push_back(it.key());
  }
  return by_file;
}

absl::StatusOr<std::unique_ptr<WeightFiles>> WeightFiles::Open(const std::string& dir_prefix) {
  std::unique_ptr<WeightFiles> w(new WeightFiles());
  const std::string single = dir_prefix + kSingleWeightsFile;
  const std::string index_path = dir_prefix + kWeightsIndexFile;
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> one = SafetensorsFile::Open(single);
  if (one.ok() || !absl::IsNotFound(one.status())) {
    RETURN_IF_ERROR(one.status());
    w->description_ = single;
    for (const TensorView& t : (*one)->tensors()) w->where_.emplace(t.name, 0);
    w->files_.push_back(*std::move(one));
    return w;
  }
  absl::StatusOr<std::string> text = ReadWholeFile(index_path);
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(
        absl::StrCat(one.status().message(), " (and there is no ", index_path, ")"));
  }
  RETURN_IF_ERROR(text.status());
  w->description_ = index_path;
  w->sharded_ = true;
  ASSIGN_OR_RETURN(const auto by_file, ParseWeightIndex(*text, index_path));
  // Every shard first (a missing one is NotFound whatever else is wrong), then the mapping.
  for (const auto& [file, names] : by_file) {
    const std::string path = dir_prefix + file;
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> shard = SafetensorsFile::Open(path);
    if (absl::IsNotFound(shard.status())) {
      return absl::NotFoundError(absl::StrCat(index_path, ": shard '", file, "' (holding '",
                                              names.front(), "' and ", names.size() - 1,
                                              " more tensors) does not exist: ",
                                              shard.status().message()));
    }
    RETURN_IF_ERROR(shard.status());
    w->files_.push_back(*std::move(shard));
  }
  size_t idx = 0;
  for (const auto& [file, names] : by_file) {
    const SafetensorsFile& shard = *w->files_[idx];
    const std::set<std::string_view> listed(names.begin(), names.end());
    for (const TensorView& t : shard.tensors()) {
      if (listed.count(t.name) == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            shard.path(), ": tensor '", t.name, "' is not mapped to this file by ", index_path));
      }
      if (!w->where_.emplace(t.name, idx).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(shard.path(), ": tensor '", t.name, "' is also in another shard"));
      }
    }
    for (const std::string& name : names) {
      if (shard.Find(name) == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(index_path, ": maps tensor '", name,
                                                       "' to '", file,
                                                       "', which does not hold it"));
      }
    }
    ++idx;
  }
  return w;
}

WeightFiles::Found WeightFiles::Find(std::string_view name) const {
  auto it = where_.find(name);
  if (it == where_.end()) return {};
  const SafetensorsFile& f = *files_[it->second];
  return {f.Find(name), &f.path()};
}

std::vector<WeightFiles::Found> WeightFiles::All() const {
  std::vector<Found> out;
  for (const auto& f : files_) {
    for (const TensorView& t : f->tensors()) out.push_back({&t, &f->path()});
  }
  return out;
}

size_t WeightFiles::total_bytes() const {
  size_t n = 0;
  for (const auto& f : files_) n += f->file_size();
  return n;
}

}  // namespace flatstate
