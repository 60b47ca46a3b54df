# Writes OUTPUT, a C++ header defining `inline constexpr unsigned char NAME[]` with the bytes
# of INPUT and NAME_size, so a file under src/ (the web page) is compiled into the binary.
#   cmake -DINPUT=file -DOUTPUT=header.h -DNAME=kName -P embed_file.cmake
file(READ "${INPUT}" hex HEX)
get_filename_component(source_name "${INPUT}" NAME)
string(LENGTH "${hex}" hex_length)
math(EXPR size "${hex_length} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
# Lines of 16 bytes keep the header readable in an editor.
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${source_name} by cmake/embed_file.cmake: do not edit.\n"
  "#pragma once\n#include <cstddef>\n"
  "inline constexpr unsigned char ${NAME}[] = {\n${bytes}0x00};\n"
  "inline constexpr std::size_t ${NAME}_size = ${size};\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
