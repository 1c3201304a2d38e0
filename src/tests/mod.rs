//! Test suites: snapshots of every test model, weights against the eager state_dict, bad input.
