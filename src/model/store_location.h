// Where a model's expert store lives when no --store names it: the user's cache directory
// (XDG), one file per model named after its content, so a model in a read-only or shared
// directory (a Hugging Face snapshot, a system install) is never written beside.
#pragma once

#include <string>

namespace moex {

// $XDG_CACHE_HOME/moex, or ~/.cache/moex. Throws Error when neither variable names an
// absolute path.
std::string ExpertStoreCacheDir();

// The store's file name in the cache directory: NAME-HEX.experts.moex, with NAME from
// ModelShortName and HEX the 16 digits of ModelContentId.
std::string CachedStoreName(const std::string& model_path, const std::string& content_id);

// The store in `dir` whose name ends with this content hash's -HEX.experts.moex, whatever
// model name precedes it; "" when there is none.
std::string FindCachedStore(const std::string& dir, const std::string& content_id);

// The default store of a model: the file in ExpertStoreCacheDir() (which is created) whose
// name ends with the content hash's -HEX.experts.moex, or CachedStoreName when none does.
// Throws Error with a --store hint when that directory cannot be created, or cannot be
// written while the store is not there yet. (Versions before this one put stores beside the
// model as DIR/experts.moex or FILE.gguf.experts.moex; those are not used and may be removed.)
std::string DefaultExpertStorePath(const std::string& model_path, const std::string& content_id);

}  // namespace moex
