// Builds the expert store (`moex pack`): repacks every routed expert of a checkpoint
// neuron-major into one file, writing to a temporary name and renaming only when complete,
// so a failed or interrupted pack never leaves a store that a later run could use.
#pragma once

#include <string>
#include <vector>

#include "io/expert_store.h"
#include "io/weight_source.h"
#include "model/expert_layout.h"
#include "model/model_config.h"

namespace moex {

struct PackOptions {
  std::string out_path;                 // The store file to create (replaced atomically).
  std::string source_id;                // ModelContentId of the source (stored in the header).
  std::string source_path;              // For messages.
  bool progress = true;                 // Progress bar on stderr.
  std::string path_option = "--store";  // The option naming out_path, for error hints.
};

// HF name of one routed expert tensor; which: 0 = gate, 1 = up, 2 = down.
std::string RoutedExpertTensorName(Arch arch, int layer, int expert, int which);

// Empty when `store` was packed from `source_id` for this model shape and dtype; otherwise a
// sentence saying what differs.
std::string StoreMismatch(const ExpertStore& store, const ModelConfig& config,
                          const std::vector<ExpertShape>& shapes, const std::string& source_id);
// The same for a model whose every routed expert is in `dtype`.
std::string StoreMismatch(const ExpertStore& store, const ModelConfig& config, DType dtype,
                          const std::string& source_id);

// Packs all routed experts. Throws Error (e.g. "disk full") after removing its temporary
// file; the previous store at out_path, if any, is left untouched on failure. out_path must
// be new or a store already (CheckStoreTarget); concurrent packers of one path take turns
// (StoreLock), each writing its own temporary file renamed into place when complete. Says
// on stderr how big the store will be and where; refuses, writing nothing, when that
// directory has less free space than the store needs.
void PackExpertStore(const WeightSource& source, const ModelConfig& config,
                     const PackOptions& options);

// Opens the store at options.out_path if it is complete, uncorrupted (header and table) and
// was packed from this source for this model; otherwise logs why and rebuilds it. A store
// flagged corrupt by a failed read (see MarkExpertStoreCorrupt) is rebuilt too. A process
// that finds another packing the same store waits for it and uses its result.
ExpertStore OpenOrPackExpertStore(const WeightSource& source, const ModelConfig& config,
                                  const PackOptions& options);

// Why the store at options.out_path cannot serve this model -- missing, flagged corrupt,
// a bad header or table, or packed from another checkpoint, shape or dtype -- or "" when it
// can (OpenOrPackExpertStore would use it as it is). Reads only the header and table.
std::string WhyExpertStoreUnusable(const WeightSource& source, const ModelConfig& config,
                                   const PackOptions& options);

// The size of the store of this model, in bytes, known before packing.
uint64_t ExpertStoreBytes(const WeightSource& source, const ModelConfig& config);

// Records that a read found corrupt data, so the next OpenOrPackExpertStore rebuilds.
void MarkExpertStoreCorrupt(const std::string& store_path, const std::string& why);

// What the store will hold, one per MoE layer: the gate and down dtypes of the layer's first
// expert, padded to one geometry (PadToCommonShape).
std::vector<ExpertShape> RoutedExpertShapes(const WeightSource& source, const ModelConfig& config);

}  // namespace moex
