// The umbrella header users include: arrays, ops, pytrees, jit, grad, random, export and the runtime basics.
#pragma once

#include "mcx/core/dtype.h"
#include "mcx/core/error.h"
#include "mcx/core/shape.h"
#include "mcx/runtime/device.h"
#include "mcx/trace/array.h"
#include "mcx/trace/dispatch.h"
#include "mcx/trace/export.h"
#include "mcx/trace/grad.h"
#include "mcx/trace/jit.h"
#include "mcx/trace/ops.h"
#include "mcx/trace/pytree.h"
#include "mcx/trace/random.h"
