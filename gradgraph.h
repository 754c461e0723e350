// The umbrella header: the whole public API in one include, `#include <gradgraph/gradgraph.h>`.
// Installed as P/include/gradgraph/gradgraph.h next to the layer directories; in a build tree
// <gradgraph/...> resolves through build/include/gradgraph, a link to the source directory.
// Every public header includes its neighbours relative to itself ("../ops/ir/graph.h"), so only
// P/include is needed on the path. Kernel internals (ops/cpu/simd.h, kernel_util.h, gemm.h,
// parallel.h; GG_PRIVATE_HEADERS in CMakeLists.txt) are private: not installed, never
// included from here.
#pragma once

// ops: the IR, shapes, builders, tensors, the executor and thread control
#include "ops/ir/build.h"
#include "ops/runtime/config.h"
#include "ops/ir/eval_f64.h"
#include "ops/runtime/executor.h"
#include "ops/passes/fuse.h"
#include "ops/ir/graph.h"
#include "ops/ir/op_rule.h"
#include "ops/cpu/bf16.h"
#include "ops/cpu/peak.h"
#include "ops/ir/shape.h"
#include "ops/passes/remat.h"
#include "ops/passes/simplify.h"
#include "ops/ir/tangent.h"
#include "ops/ir/tensor.h"
#include "ops/cpu/threads.h"

// autodiff: grad(), gradcheck(), hvp(), gradient statistics
#include "autodiff/grad.h"
#include "autodiff/grad_stats.h"
#include "autodiff/gradcheck.h"
#include "autodiff/hvp.h"
#include "autodiff/param_grad.h"

// dsl: Expr handles, param(), nn compositions (attention, blocks, encoder and decoder)
#include "dsl/expr.h"
#include "dsl/nn.h"
#include "dsl/transformer.h"
#include "dsl/typed.h"
#include "dsl/typed_layers.h"
#include "dsl/typed_movement.h"

// io: safetensors, capped reads of outside files, strict JSON objects, message helpers
#include "io/error.h"
#include "io/json_object.h"
#include "io/message.h"
#include "io/read_file.h"
#include "io/safetensors.h"

// train: any model on the generic trainer: option tables, optimizers, clipping and
// schedules, checkpoints, data, reports
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/data_path.h"
#include "train/distributed.h"
#include "train/error.h"
#include "train/model.h"
#include "train/optim.h"
#include "train/options.h"
#include "train/plot.h"
#include "train/progress.h"
#include "train/replay.h"
#include "train/session.h"
#include "train/trainer.h"

// models: the reference GPT, the char-LM job, the encoder-decoder, the ViT and the digits job,
// declared with the DSL as a user would
#include "models/attention_maps.h"
#include "models/char_lm.h"
#include "models/digits.h"
#include "models/gpt.h"
#include "models/gpt_flops.h"
#include "models/seq2seq.h"
#include "models/vit.h"
