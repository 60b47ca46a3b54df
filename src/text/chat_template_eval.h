// Renders a parsed Jinja template against a set of variables.
#pragma once

#include <functional>
#include <string>

#include "text/chat_template_ast.h"

namespace moex::jinja {

// Asked every few thousand evaluation steps; true stops the render (the server's request
// timeout and shutdown).
using CancelCheck = std::function<bool()>;

// Throws moex::Error for runtime failures (raise_exception, unknown filter, bad operands),
// and when `cancelled` says so ("chat template: rendering cancelled").
std::string Render(const Body& body, const ValueDict& variables,
                   const CancelCheck& cancelled = nullptr);

}  // namespace moex::jinja
