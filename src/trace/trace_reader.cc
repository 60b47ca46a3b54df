#include "trace/trace_reader.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "io/expert_store_format.h"
#include "io/input_file.h"

namespace moex::trace {

void TraceTensors::Add(std::string name, int64_t rows, int64_t cols, std::vector<float> data) {
  std::vector<float>& stored = data_[name] = std::move(data);
  TensorView v;
  v.name = name;
  v.dtype = DType::kF32;
  v.shape = {rows, cols};
  v.data = reinterpret_cast<const std::byte*>(stored.data());
  v.nbytes = stored.size() * sizeof(float);
  views_[name] = v;
}

const TensorView* TraceTensors::Find(const std::string& name) const {
  auto it = views_.find(name);
  return it == views_.end() ? nullptr : &it->second;
}

std::vector<std::string> TraceTensors::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, view] : views_) names.push_back(name);
  return names;
}

TraceReader::TraceReader(const std::string& path)
    : path_(path), tensors_(std::make_unique<TraceTensors>(path)) {
  // A FIFO or device is refused before fopen, which would wait for a FIFO's writer.
  Check(RegularFileExists(path), "cannot open trace ", path, ": no such file");
  file_.reset(std::fopen(path.c_str(), "rb"));
  Check(file_ != nullptr, "cannot open trace ", path, ": ", std::strerror(errno));
  struct stat st {};
  Check(fstat(fileno(file_.get()), &st) == 0, "cannot stat trace ", path, ": ", std::strerror(errno));
  file_size_ = static_cast<uint64_t>(st.st_size);

  char magic[sizeof kTraceMagic];
  Check(file_size_ >= sizeof magic + 8, path, " is not a moex trace (too short)");
  ReadExact(magic, sizeof magic, "magic");
  Check(std::memcmp(magic, kTraceMagic, sizeof magic) == 0, path,
        " is not a moex trace (bad magic)");
  uint32_t version = 0, length = 0;
  ReadExact(&version, sizeof version, "version");
  Check(version >= kOldestTraceVersion && version <= kTraceVersion, path,
        " is trace format version ", version, "; this moex reads versions ", kOldestTraceVersion,
        " to ", kTraceVersion);
  ReadExact(&length, sizeof length, "header length");
  Check(length <= file_size_ - offset_, path, " is truncated: its header needs ", length,
        " bytes, the file has ", file_size_ - offset_, " left");
  std::string json(length, '\0');
  ReadExact(json.data(), length, "header");
  if (version >= 2) {
    uint64_t checksum = 0;
    ReadExact(&checksum, sizeof checksum, "header checksum");
    Check(StoreChecksum(std::as_bytes(std::span(json))) == checksum, path,
          ": the trace header fails its checksum (corrupt file)");
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    Fail(path, ": trace header is not valid JSON: ", e.what());
  }
  header_ = HeaderFromJson(j);

  // Tensors come first; remember where the events start.
  for (;;) {
    const uint64_t at = offset_;
    const int64_t records_before = records_;
    RecordTag tag{};
    Check(ReadRecord(&tag, &payload_), path, " is truncated: no end record");
    if (tag != RecordTag::kTensor) {
      Check(std::fseek(file_.get(), static_cast<long>(at), SEEK_SET) == 0, "cannot seek in ", path);
      offset_ = at;
      records_ = records_before;
      break;
    }
    size_t pos = 0;
    auto get = [&](void* out, size_t n) {
      Check(payload_.size() - pos >= n, path, ": tensor record at byte ", at, " ends early");
      std::memcpy(out, payload_.data() + pos, n);
      pos += n;
    };
    uint32_t name_len = 0;
    int64_t rows = 0, cols = 0;
    get(&name_len, sizeof name_len);
    // Checked before allocating: a corrupt length must not allocate gigabytes.
    Check(name_len <= payload_.size() - pos, path, ": tensor record at byte ", at, " ends early");
    std::string name(name_len, '\0');
    get(name.data(), name_len);
    get(&rows, sizeof rows);
    get(&cols, sizeof cols);
    // rows * cols * 4 must not wrap around to the payload size.
    uint64_t bytes = 0;
    Check(rows > 0 && cols > 0 &&
              !__builtin_mul_overflow(static_cast<uint64_t>(rows), static_cast<uint64_t>(cols),
                                      &bytes) &&
              !__builtin_mul_overflow(bytes, uint64_t{4}, &bytes) && bytes == payload_.size() - pos,
          path, ": tensor ", name, " has a bad shape or size");
    std::vector<float> data(static_cast<size_t>(rows * cols));
    get(data.data(), data.size() * sizeof(float));
    tensors_->Add(name, rows, cols, std::move(data));
  }
  events_offset_ = offset_;
  events_records_ = records_;
}

TraceReader::~TraceReader() = default;

void TraceReader::ReadExact(void* out, size_t n, const char* what) {
  if (n == 0) return;
  const size_t got = std::fread(out, 1, n, file_.get());
  // Fail, not Check: the message's strings are built only when the read came up short.
  if (got != n)
    Fail(path_, " is truncated: reading the ", what, " at byte ", offset_,
         std::ferror(file_.get()) ? std::string(" failed: ") + std::strerror(errno) : "");
  offset_ += n;
}

bool TraceReader::ReadRecord(RecordTag* tag, std::vector<std::byte>* payload) {
  if (offset_ == file_size_) return false;
  const uint64_t at = offset_;
  uint32_t tag_value = 0, reserved = 0;
  uint64_t length = 0, checksum = 0;
  ReadExact(&tag_value, sizeof tag_value, "record tag");
  ReadExact(&reserved, sizeof reserved, "record frame");
  ReadExact(&length, sizeof length, "record length");
  ReadExact(&checksum, sizeof checksum, "record checksum");
  Check(tag_value >= 1 && tag_value <= static_cast<uint32_t>(RecordTag::kEnd), path_,
        ": unknown record tag ", tag_value, " at byte ", at, " (corrupt file?)");
  Check(length <= file_size_ - offset_, path_, " is truncated: record at byte ", at, " needs ",
        length, " bytes, the file has ", file_size_ - offset_, " left");
  payload->resize(static_cast<size_t>(length));
  ReadExact(payload->data(), payload->size(), "record");
  Check(StoreChecksum(*payload) == checksum, path_, ": record at byte ", at,
        " fails its checksum (corrupt file)");
  *tag = static_cast<RecordTag>(tag_value);
  ++records_;
  return true;
}

bool TraceReader::Next(TraceEvent* event) {
  if (ended_) return false;
  RecordTag tag{};
  Check(ReadRecord(&tag, &payload_), path_,
        " is truncated: no end record (was the recording interrupted?)");
  if (tag == RecordTag::kEnd) {
    int64_t count = -1;
    Check(payload_.size() == sizeof count, path_, ": malformed end record");
    std::memcpy(&count, payload_.data(), sizeof count);
    Check(count == records_ - 1, path_, ": end record counts ", count, " records, the file has ",
          records_ - 1);
    Check(offset_ == file_size_, path_, ": ", file_size_ - offset_,
          " unexpected bytes after the end record");
    Check(open_requests_.empty(), path_, ": request ",
          open_requests_.empty() ? 0 : *open_requests_.begin(),
          " begins but never ends (its end record is missing)");
    ended_ = true;
    return false;
  }
  Check(tag != RecordTag::kTensor, path_, ": tensor record after the first event");
  const std::string where = path_ + " (record " + std::to_string(records_ - 1) + ")";
  *event = DecodeEvent(tag, payload_.data(), payload_.size(), header_, where);
  CheckOrder(*event, where);
  return true;
}

void TraceReader::CheckOrder(const TraceEvent& e, const std::string& where) {
  switch (e.kind) {
    case TraceEvent::kRequestBegin:
      Check(!open_requests_.contains(e.request) && !ended_requests_.contains(e.request), where,
            ": request ", e.request, " begins a second time");
      open_requests_.insert(e.request);
      break;
    case TraceEvent::kRequestEnd:
      Check(open_requests_.erase(e.request) == 1, where, ": request ", e.request, " ends ",
            ended_requests_.contains(e.request) ? "a second time" : "without having begun");
      ended_requests_.insert(e.request);
      break;
    case TraceEvent::kIteration:
      Check(e.iteration.iteration > last_iteration_, where, ": pass ", e.iteration.iteration,
            " follows pass ", last_iteration_, " (passes are numbered upwards)");
      last_iteration_ = e.iteration.iteration;
      for (int64_t r : e.iteration.requests)
        Check(open_requests_.contains(r), where, ": pass ", e.iteration.iteration,
              " computes request ", r, ", which ",
              ended_requests_.contains(r) ? "has already ended" : "has not begun");
      break;
  }
}

void TraceReader::Rewind() {
  Check(std::fseek(file_.get(), static_cast<long>(events_offset_), SEEK_SET) == 0, "cannot seek in ",
        path_);
  offset_ = events_offset_;
  records_ = events_records_;
  ended_ = false;
  open_requests_.clear();
  ended_requests_.clear();
  last_iteration_ = INT64_MIN;
}

}  // namespace moex::trace
