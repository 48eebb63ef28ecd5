// The one list of the environment variables hmr reads: the library's, and those of the NCCL
// net plugin built on it.  hmr-info's config section is printed from it, and
// tests/tools/environment_list_test.sh fails when a variable read anywhere in the code is
// missing from it, from hmr-info's config section or from docs/environment.md.  A new
// variable is added here first.
#pragma once

#include <span>
#include <string_view>

namespace hmr::core {

// Who reads a variable.
enum class VariableReader {
  library,      // libhmr (every program using hmr)
  library_and_plugin,  // libhmr and libnccl-net-hmr.so, each with the same meaning
  nccl_plugin,  // libnccl-net-hmr.so only, at its first init
};

// How its value is read; hmr-info checks boolean and unsigned values the way hmr does.
enum class VariableKind {
  boolean,          // util/environment.h env_bool: 1/0, yes/no, true/false, on/off, y/n, any case
  unsigned_number,  // util/environment.h env_unsigned: decimal, or 0x hex
  library_path,     // HMR_<VENDOR>_LIBRARY: a path dlopen'ed instead of the default soname
  other,            // a list, a name or a number of its own syntax (see `values`)
};

struct EnvironmentVariable {
  const char* name;
  VariableReader reader;
  VariableKind kind;
  const char* values;         // what it accepts, in words
  const char* default_value;  // in words (a boolean's is "1" or "0"; a path's is the soname)
  const char* read_when;      // when hmr reads it
};

std::span<const EnvironmentVariable> environment_variables();

// The entry for `name`, or null when hmr does not read it.
const EnvironmentVariable* find_environment_variable(std::string_view name);

const char* reader_name(VariableReader reader);

}  // namespace hmr::core
