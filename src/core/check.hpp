// Input checks in the Stan Math manner: check_*(function, name, ...) throws InputError with a
// message naming the function, the object, the index and the violated constraint.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>

#include "core/error.hpp"

namespace arcal {

[[noreturn]] void throw_input(const std::string& function, const std::string& message);

/// Throws "function: name[index] is value, but must be constraint".
[[noreturn]] void throw_index(const std::string& function, const std::string& name, std::size_t index,
                              const std::string& value, const std::string& constraint);

inline void check_finite(const char* function, const char* name, std::size_t index, double v) {
  if (!std::isfinite(v)) throw_index(function, name, index, std::to_string(v), "finite");
}

inline void check_probability(const char* function, const char* name, std::size_t index, double v) {
  if (!(v >= 0.0 && v <= 1.0)) throw_index(function, name, index, std::to_string(v), "in [0, 1]");
}

inline void check_label(const char* function, const char* name, std::size_t index, long long y, long long classes) {
  if (y < 0 || y >= classes)
    throw_index(function, name, index, std::to_string(y), "in [0, " + std::to_string(classes - 1) + "]");
}

inline void check_positive(const char* function, const char* name, double v) {
  if (!(v > 0.0)) throw_input(function, std::string(name) + " is " + std::to_string(v) + ", but must be positive");
}

void check_same_size(const char* function, const char* name_a, std::size_t a, const char* name_b, std::size_t b);

}  // namespace arcal
