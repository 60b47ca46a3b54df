// Reads a routing trace event by event, verifying every record's length and checksum, so a
// truncated, corrupt or foreign file gives a clear error rather than a wrong replay.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "io/weight_source.h"
#include "trace/trace_format.h"

namespace moex::trace {

// The router weights a trace carries, under the model's tensor names (f32).
class TraceTensors : public WeightSource {
 public:
  explicit TraceTensors(std::string path) : path_(std::move(path)) {}
  void Add(std::string name, int64_t rows, int64_t cols, std::vector<float> data);
  const TensorView* Find(const std::string& name) const override;
  std::vector<std::string> Names() const override;
  std::string Describe() const override { return path_; }
  bool empty() const { return views_.empty(); }

 private:
  std::string path_;
  std::map<std::string, TensorView> views_;
  std::map<std::string, std::vector<float>> data_;
};

class TraceReader {
 public:
  // Reads the header and any tensors; throws Error for a missing, foreign, newer or corrupt file.
  explicit TraceReader(const std::string& path);
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  const TraceHeader& header() const { return header_; }
  const TraceTensors& tensors() const { return *tensors_; }
  const std::string& path() const { return path_; }

  // The next event; false once the end record has been read. Throws Error on truncation,
  // and on events out of their order: a request begins once, is in passes only between its
  // begin and its end, and ends before the file does; passes are numbered upwards.
  bool Next(TraceEvent* event);
  // Back to the first event.
  void Rewind();

 private:
  // Reads one record frame and payload; false at the end of the file (only legal after kEnd).
  bool ReadRecord(RecordTag* tag, std::vector<std::byte>* payload);
  void ReadExact(void* out, size_t n, const char* what);
  // Checks `event` against the events before it (Next's order rules).
  void CheckOrder(const TraceEvent& event, const std::string& where);

  std::string path_;
  // Closed however the reader ends, a constructor that throws included (a leaked handle per
  // refused trace ran a fuzzer out of descriptors).
  struct CloseFile {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, CloseFile> file_;
  uint64_t file_size_ = 0;
  uint64_t offset_ = 0;
  uint64_t events_offset_ = 0;
  int64_t records_ = 0;  // Records read so far (the end record checks the count).
  int64_t events_records_ = 0;
  bool ended_ = false;
  TraceHeader header_;
  std::unique_ptr<TraceTensors> tensors_;
  std::vector<std::byte> payload_;
  // Order state, from the first event (Rewind clears it).
  std::set<int64_t> open_requests_, ended_requests_;
  int64_t last_iteration_ = INT64_MIN;
};

}  // namespace moex::trace
