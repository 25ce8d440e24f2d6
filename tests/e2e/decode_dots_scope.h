// The decode dots (kernels::set_decode_dots) for a scope, then the process's choice again. Set
// before loading a model: the choice decides the layout its weights are kept in.
#pragma once

#include "kernels/quant.h"

namespace adakv::test {

class DecodeDotsScope {
 public:
  explicit DecodeDotsScope(kernels::MatmulPath path) { kernels::set_decode_dots(path); }
  ~DecodeDotsScope() { kernels::set_decode_dots(saved_); }
  DecodeDotsScope(const DecodeDotsScope&) = delete;
  DecodeDotsScope& operator=(const DecodeDotsScope&) = delete;

 private:
  kernels::MatmulPath saved_ = kernels::decode_dots_path();
};

}  // namespace adakv::test
