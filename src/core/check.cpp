#include "core/check.hpp"

namespace arcal {

void throw_input(const std::string& function, const std::string& message) {
  throw InputError(function + ": " + message);
}

void throw_index(const std::string& function, const std::string& name, std::size_t index, const std::string& value,
                 const std::string& constraint) {
  throw InputError(function + ": " + name + "[" + std::to_string(index) + "] is " + value + ", but must be " +
                   constraint);
}

void check_same_size(const char* function, const char* name_a, std::size_t a, const char* name_b, std::size_t b) {
  if (a != b)
    throw_input(function, std::string(name_a) + " has " + std::to_string(a) + " elements but " + name_b + " has " +
                              std::to_string(b) + "; they must match");
}

}  // namespace arcal
