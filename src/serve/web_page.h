// The page served at GET / (src/serve/web/index.html, compiled into the binary at build
// time): a chat box over /v1/chat/completions and a live view of the expert cache drawn
// from GET /moex/cache. It loads nothing from elsewhere.
#pragma once

#include <string_view>

namespace moex::serve {

std::string_view WebPage();

}  // namespace moex::serve
