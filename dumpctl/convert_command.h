// `dumpctl convert IN [-o OUT]`: bin files (one file, or every bin file beneath a directory)
// to .npy files named as msaccucmp's convert names them.
#pragma once

#include <ostream>
#include <string_view>
#include <vector>

namespace dumpd::dumpctl {

// `args` are the words after "convert". Exit code: 0 every file converted, 1 some file was
// rejected or could not be written (each named on `err`, the others still converted), 2 usage.
int runConvertCommand(const std::vector<std::string_view>& args, std::ostream& out,
                      std::ostream& err);

}  // namespace dumpd::dumpctl
