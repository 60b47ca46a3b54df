// What identifies a model's checkpoint on disk: the files it is read from, a hash of their
// content (which names its expert store and tells a stale store from a current one), and a
// short readable name. docs/expert-store.md says what the hash covers and why.
#pragma once

#include <string>
#include <vector>

namespace moex {

// The files a checkpoint is read from, sorted: an HF directory's config.json, *.safetensors
// and *.gguf; a .gguf file, or every part of a split GGUF named by its first part. Throws
// Error when the directory cannot be listed.
std::vector<std::string> ModelFiles(const std::string& model_path);

// "content-" and 16 hex digits: a 64-bit hash of each of ModelFiles' size, first MiB and 16
// evenly spaced 4 KiB samples (and, in a directory, its name). It does not depend on where
// the model is or when its files were written, so two copies of one model share it, while
// a requantised, fine-tuned or edited checkpoint almost surely changes it. Throws Error
// naming the file when one cannot be read.
std::string ModelContentId(const std::string& model_path);

// A short name for messages and file names, from [A-Za-z0-9._-]: a GGUF's file name
// without ".gguf" or the split suffix, an HF directory's name, or for a Hugging Face cache
// snapshot (.../models--ORG--NAME/snapshots/REV) the repository's NAME.
std::string ModelShortName(const std::string& model_path);

}  // namespace moex
