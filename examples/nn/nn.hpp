#pragma once
// The examples' neural-network toolkit in one include. It is example code, not part of hitch's API.

#include "nn/batch_norm.hpp"
#include "nn/blas.hpp"
#include "nn/conv2d.hpp"
#include "nn/dense.hpp"
#include "nn/flatten.hpp"
#include "nn/layer.hpp"
#include "nn/loss.hpp"
#include "nn/model.hpp"
#include "nn/models.hpp"
#include "nn/pooling.hpp"
#include "nn/random.hpp"
#include "nn/relu.hpp"
#include "nn/residual.hpp"
