#include "trace/trace_writer.h"

#include <cstring>

#include "core/error.h"
#include "io/expert_store_format.h"
#include "kernels/ops.h"

namespace moex::trace {

TraceWriter::TraceWriter(const std::string& path, const TraceHeader& header)
    : header_(header), out_(path) {
  const std::string json = HeaderToJson(header).dump();
  out_.Write(kTraceMagic, sizeof kTraceMagic);
  const uint32_t version = kTraceVersion;
  const uint32_t length = static_cast<uint32_t>(json.size());
  out_.Write(&version, sizeof version);
  out_.Write(&length, sizeof length);
  out_.Write(json.data(), json.size());
  const uint64_t checksum = StoreChecksum(std::as_bytes(std::span(json)));
  out_.Write(&checksum, sizeof checksum);
}

void TraceWriter::WriteRecord(RecordTag tag, std::span<const std::byte> payload) {
  Check(!finished_, "trace writer: write after Finish");
  const uint32_t tag_value = static_cast<uint32_t>(tag), reserved = 0;
  const uint64_t length = payload.size();
  const uint64_t checksum = StoreChecksum(payload);
  out_.Write(&tag_value, sizeof tag_value);
  out_.Write(&reserved, sizeof reserved);
  out_.Write(&length, sizeof length);
  out_.Write(&checksum, sizeof checksum);
  out_.Write(payload.data(), payload.size());
  ++records_;
}

void TraceWriter::WriteTensor(const TensorView& tensor) {
  Check(!events_started_, "trace writer: tensors must precede the events");
  Check(tensor.shape.size() == 2, "trace writer: tensor ", tensor.name, " is not a matrix");
  std::vector<std::byte> payload;
  auto put = [&payload](const void* p, size_t n) {
    const size_t at = payload.size();
    payload.resize(at + n);
    std::memcpy(payload.data() + at, p, n);
  };
  const uint32_t name_len = static_cast<uint32_t>(tensor.name.size());
  const int64_t rows = tensor.shape[0], cols = tensor.shape[1];
  put(&name_len, sizeof name_len);
  put(tensor.name.data(), name_len);
  put(&rows, sizeof rows);
  put(&cols, sizeof cols);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    kernels::ToF32(tensor.row(r), tensor.dtype, cols, row.data());
    put(row.data(), row.size() * sizeof(float));
  }
  WriteRecord(RecordTag::kTensor, payload);
}

void TraceWriter::Write(const TraceEvent& event) {
  events_started_ = true;
  const std::vector<std::byte> payload = EncodeEvent(event, header_);
  const RecordTag tag = event.kind == TraceEvent::kRequestBegin ? RecordTag::kRequestBegin
                        : event.kind == TraceEvent::kIteration  ? RecordTag::kIteration
                                                                : RecordTag::kRequestEnd;
  WriteRecord(tag, payload);
}

void TraceWriter::Finish() {
  const int64_t count = records_;
  WriteRecord(RecordTag::kEnd,
              std::span<const std::byte>(reinterpret_cast<const std::byte*>(&count), sizeof count));
  finished_ = true;
  out_.Commit();
}

}  // namespace moex::trace
