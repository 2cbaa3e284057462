// `train cards`: the cards --card knows, with their data sheets, and the speed model's fit on its
// calibration figures (speed_calibration.h) with each figure's residual, as markdown on stdout.
#pragma once

#include <string>

namespace training {

std::string cards_report();

}  // namespace training
