// The umbrella header users include: arrays, ops, pytrees, jit, grad, random, export, devices,
// meshes, shardings, placement, shard_map and collectives, transfer and thread guards.
#pragma once

#include "mcx/core/dtype.h"
#include "mcx/core/error.h"
#include "mcx/core/shape.h"
#include "mcx/runtime/device.h"
#include "mcx/runtime/mesh.h"
#include "mcx/runtime/sharding.h"
#include "mcx/runtime/thread_guard.h"
#include "mcx/runtime/transfer_guard.h"
#include "mcx/spmd/partition_spec.h"
#include "mcx/trace/array.h"
#include "mcx/trace/dispatch.h"
#include "mcx/trace/export.h"
#include "mcx/trace/forward.h"
#include "mcx/trace/grad.h"
#include "mcx/trace/jit.h"
#include "mcx/trace/ops.h"
#include "mcx/trace/placement.h"
#include "mcx/trace/pytree.h"
#include "mcx/trace/random.h"
#include "mcx/trace/shard_map.h"
