// One link of the memory hierarchy (storage -> host now; host -> device later): it moves
// byte ranges asynchronously and reports each completion. The FetchEngine decides what to
// move and when; a link only moves it. A CUDA link implements the same interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace moex::tiers {

struct Transfer {
  uint64_t tag = 0;         // Returned with the completion.
  uint64_t src_offset = 0;  // Source position (file offset for storage).
  std::byte* dst = nullptr;
  uint32_t bytes = 0;
};

class TransferLink {
 public:
  // result: bytes moved (>= 0), or -errno with `message` saying what failed.
  using OnComplete = std::function<void(uint64_t tag, int result, const std::string& message)>;

  virtual ~TransferLink() = default;
  virtual std::string name() const = 0;
  virtual int max_in_flight() const = 0;
  // Must be set before the first Submit. Called from the link's own thread.
  virtual void SetOnComplete(OnComplete fn) = 0;
  // Starts a transfer; never blocks on its completion. Callers serialize Submit calls.
  virtual void Submit(const Transfer& t) = 0;
};

}  // namespace moex::tiers
