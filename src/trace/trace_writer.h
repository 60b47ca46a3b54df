// Streams a routing trace to disk. The file appears under its name only after Finish():
// an interrupted recording leaves no trace that could be mistaken for a whole one.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/output_file.h"
#include "trace/trace_format.h"

namespace moex::trace {

class TraceWriter {
 public:
  TraceWriter(const std::string& path, const TraceHeader& header);

  // Router weights (any dtype, stored as f32); only before the first event.
  void WriteTensor(const TensorView& tensor);
  void Write(const TraceEvent& event);
  // Writes the end record and moves the file into place.
  void Finish();

  const TraceHeader& header() const { return header_; }
  int64_t records() const { return records_; }
  uint64_t bytes_written() const { return out_.bytes_written(); }

 private:
  void WriteRecord(RecordTag tag, std::span<const std::byte> payload);

  TraceHeader header_;
  OutputFile out_;
  int64_t records_ = 0;
  bool events_started_ = false;
  bool finished_ = false;
};

}  // namespace moex::trace
