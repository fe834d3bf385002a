// The attnkit executable: everything happens in attnkit::cli::run, which tests call in-process.
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  return attnkit::cli::run(args, std::cout, std::cerr);
}
