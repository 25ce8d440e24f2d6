// The CPU backend's factory, for make_backend (kernels/backend.cpp).
#pragma once

#include <memory>

#include "kernels/backend.h"

namespace adakv::kernels {

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace adakv::kernels
