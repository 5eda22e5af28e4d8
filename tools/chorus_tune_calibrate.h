// chorus-tune --calibrate (chorus_tune_calibrate.cc).
#pragma once

#include <string>

// Measures, fits and writes the tuning file; prints the measurements and the fit. quick: fewer
// sizes and calls (for tests). Returns the exit code.
int runCalibration(const std::string& output, bool quick);

// Rank 1 and up of a calibration measurement, which runCalibration starts as
// `chorus-tune --calibrate-rank ID QUICK SIZES RANK NRANKS` (the arguments after the flag).
// Returns the exit code.
int runCalibrationRank(int argc, char** argv);
