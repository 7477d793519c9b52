// The ops library (numpy-like functions on mcx::Array); see mcx/trace/ops.h.
#pragma once

#include "mcx/trace/ops.h"
