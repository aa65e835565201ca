#pragma once
// Umbrella header: everything a Kiln user needs.
#include "kiln/array.h"
#include "kiln/compile.h"
#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/fast.h"
#include "kiln/io.h"
#include "kiln/memory.h"
#include "kiln/ops.h"
#include "kiln/random.h"
#include "kiln/transforms.h"
#include "kiln/version.h"
