#include <iostream>

int main() {
  std::cerr << "moex: the command line is being built\n";
  return 1;
}
