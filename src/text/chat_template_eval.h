// Renders a parsed Jinja template against a set of variables.
#pragma once

#include <string>

#include "text/chat_template_ast.h"

namespace moex::jinja {

// Throws moex::Error for runtime failures (raise_exception, unknown filter, bad operands).
std::string Render(const Body& body, const ValueDict& variables);

}  // namespace moex::jinja
