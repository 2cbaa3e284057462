// `train cards`: the cards --card knows, with their data sheets, and the speed model's fit on its
// calibration figures (speed_calibration.h) with each figure's residual, as markdown on stdout; or
// the cards alone as JSON, the one place scripts learn a card's name from (compare_devices.py,
// speed_holdout.py: they ask train rather than fold names themselves).
#pragma once

#include <string>
#include <vector>

namespace training {

// `asked`: the cards to list, in order, each found as --card finds it (find_card); empty: every
// card known by name. `json`: {"cards": [...]}, each card's name, memory and data sheet (null where
// none), with "given" when asked.
std::string cards_report(const std::vector<std::string>& asked = {}, bool json = false);

}  // namespace training
