#include "io/weight_source.h"

#include "core/error.h"

namespace moex {

const TensorView& WeightSource::Get(const std::string& name) const {
  const TensorView* t = Find(name);
  Check(t != nullptr, "missing tensor '", name, "' in ", Describe());
  return *t;
}

const TensorView& WeightSource::Get(const std::string& name,
                                    const std::vector<int64_t>& shape) const {
  const TensorView& t = Get(name);
  if (t.shape != shape)  // The message's strings are built only on failure.
    Fail("tensor '", name, "' in ", Describe(), " has shape ", ShapeString(t.shape), ", expected ",
         ShapeString(shape));
  return t;
}

}  // namespace moex
