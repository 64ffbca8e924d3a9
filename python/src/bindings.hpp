// The parts of the extension module, each bound from its own file.
#pragma once

#include <pybind11/pybind11.h>

namespace arcalpy {

void bind_calibrator(pybind11::module_& m);  // calibrator.cpp: arcal.Calibrator
void bind_audit(pybind11::module_& m);       // audit.cpp: arcal.audit
void bind_cedar(pybind11::module_& m);       // cedar.cpp: arcal.cedar_attention
void bind_recording(pybind11::module_& m);   // recording.cpp: the recorder's top-k summaries

}  // namespace arcalpy
