// What the two halves of io/npz.hpp share (npz.cpp: .npy arrays; npz_archive.cpp: the zip archive):
// the one error of the npz layer, naming the file and the array, and untrusted text made printable.
#pragma once

#include <cstddef>
#include <string>

namespace arcal::npz_detail {

/// Throws InputError "npz: FILE: array 'NAME': WHAT" (without the array part when name is empty).
[[noreturn]] void fail(const std::string& file, const std::string& name, const std::string& what);

/// At most `max` characters of untrusted text for a message, control bytes shown as '?'.
std::string printable(const std::string& s, std::size_t max = 160);

}  // namespace arcal::npz_detail
