// chorus-tune --calibrate (chorus_tune_calibrate.cc).
#pragma once

#include <string>

// Measures, fits and writes the tuning file; prints the measurements and the fit. quick: fewer
// sizes and calls (for tests). netLaunch: empty, or the words that start each rank (1 and up)
// of the measurements through the network, "%r" replaced by the rank (e.g. "ip netns exec
// host%r", rank 0 being this process), so that TCP is measured on the path the ranks' hosts
// use instead of loopback; the ranks must still run on this machine (they share its cores as
// they are bound to them) and inherit the environment. Returns the exit code.
int runCalibration(const std::string& output, bool quick, const std::string& netLaunch);

// Rank 1 and up of a calibration measurement, which runCalibration starts as
// `chorus-tune --calibrate-rank ID QUICK SIZES RANK NRANKS` (the arguments after the flag).
// Returns the exit code.
int runCalibrationRank(int argc, char** argv);
