#include "data/split.h"

namespace data {

Split take_first(const Split& split, int64_t limit) {
  if (limit <= 0 || limit >= split.size()) return split;
  return {split.images.narrow(0, 0, limit), split.labels.narrow(0, 0, limit)};
}

}  // namespace data
