// Errors the user can fix (bad arguments, config, environment): the app prints the one-line
// message and exits with code 2. Data file problems use data::DataError, mapped the same way.
#pragma once

#include <stdexcept>

namespace training {

class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace training
