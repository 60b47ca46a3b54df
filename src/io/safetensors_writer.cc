#include "io/safetensors_writer.h"

#include <unistd.h>

#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"

namespace moex {

void SafetensorsWriter::SetMetadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

void SafetensorsWriter::Add(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                            ByteFill fill) {
  AddPending(name, SafetensorsDTypeName(dtype), shape, 0, dtype, std::move(fill));
}

void SafetensorsWriter::AddBytes(const std::string& name, const std::vector<int64_t>& shape,
                                 ByteFill fill, const char* dtype) {
  const std::string type = dtype;
  Check(type == "U8" || type == "F8_E4M3", "safetensors: ", name, ": byte dtype ", type,
        " is not U8 or F8_E4M3");
  AddPending(name, type == "U8" ? "U8" : "F8_E4M3", shape, 1, DType::kF32, std::move(fill));
}

// elem_bytes_or_zero: 1 for U8, 0 to size by elem_dtype.
void SafetensorsWriter::AddPending(const std::string& name, const char* dtype,
                                   const std::vector<int64_t>& shape, size_t elem_bytes_or_zero,
                                   DType elem_dtype, ByteFill fill) {
  Check(!name.empty() && name != "__metadata__", "safetensors: invalid tensor name '", name, "'");
  Check(!names_.contains(name), "safetensors: duplicate tensor '", name, "'");
  int64_t numel = 1;
  for (int64_t d : shape) {
    Check(d >= 0, "safetensors: tensor '", name, "' has negative dimension in ",
          ShapeString(shape));
    numel *= d;
  }
  const int64_t cols = shape.empty() ? 1 : shape.back();
  auto bytes = [&](int64_t n) {
    return elem_bytes_or_zero > 0 ? static_cast<size_t>(n) * elem_bytes_or_zero
                                  : DTypeBytes(elem_dtype, n);
  };
  names_[name] = tensors_.size();
  tensors_.push_back({name, dtype, shape, bytes(numel), bytes(cols), std::move(fill)});
}

void SafetensorsWriter::Add(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                            const void* data) {
  SafetensorsDTypeName(dtype);
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  Add(name, dtype, shape, FillFromMemory(data, DTypeBytes(dtype, numel < 0 ? 0 : numel)));
}

uint64_t SafetensorsWriter::data_bytes() const {
  uint64_t total = 0;
  for (const auto& t : tensors_) total += t.nbytes;
  return total;
}

void SafetensorsWriter::WriteShard(OutputFile& out,
                                   const std::vector<const Pending*>& tensors) const {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const Pending* t : tensors) {
    header[t->name] = {
        {"dtype", t->dtype}, {"shape", t->shape}, {"data_offsets", {offset, offset + t->nbytes}}};
    offset += t->nbytes;
  }
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(text.size() >> (8 * i));
  out.Write(len, 8);
  out.Write(text.data(), text.size());
  for (const Pending* t : tensors) out.WriteFilled(t->nbytes, t->row_bytes, t->fill);
}

void SafetensorsWriter::WriteFile(const std::string& path) const {
  std::vector<const Pending*> all;
  for (const auto& t : tensors_) all.push_back(&t);
  OutputFile out(path);
  WriteShard(out, all);
  out.Commit();
}

void SafetensorsWriter::WriteCheckpoint(const std::string& dir, uint64_t max_shard_bytes) const {
  // Greedy split in declaration order, so related tensors (one layer) stay together.
  std::vector<std::vector<const Pending*>> shards(1);
  uint64_t shard_bytes = 0;
  for (const auto& t : tensors_) {
    if (max_shard_bytes > 0 && !shards.back().empty() && shard_bytes + t.nbytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(&t);
    shard_bytes += t.nbytes;
  }
  const std::string single = dir + "/model.safetensors";
  const std::string index = dir + "/model.safetensors.index.json";
  if (shards.size() == 1) {
    OutputFile out(single);
    WriteShard(out, shards[0]);
    out.Commit();
    std::remove(index.c_str());  // A stale index would shadow the new file.
    return;
  }

  const size_t n = shards.size();
  std::vector<std::string> names(n);
  std::vector<std::unique_ptr<OutputFile>> outs;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < n; ++i) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
    names[i] = buf;
    for (const Pending* t : shards[i]) weight_map[t->name] = names[i];
  }
  for (size_t i = 0; i < n; ++i) {
    outs.push_back(std::make_unique<OutputFile>(dir + "/" + names[i]));
    WriteShard(*outs.back(), shards[i]);
  }
  nlohmann::json index_json = {{"metadata", {{"total_size", data_bytes()}}},
                               {"weight_map", weight_map}};
  const std::string index_text = index_json.dump(2) + "\n";
  OutputFile index_out(index);
  index_out.Write(index_text.data(), index_text.size());
  // Everything is written; now publish. Undo the shards already renamed if one fails.
  size_t committed = 0;
  try {
    for (; committed < n; ++committed) outs[committed]->Commit();
    index_out.Commit();
  } catch (...) {
    for (size_t i = 0; i < committed; ++i) ::unlink((dir + "/" + names[i]).c_str());
    throw;
  }
  std::remove(single.c_str());
}

}  // namespace moex
