"""The contract every model meets: the Trace, run options, hooks and capture, masks, devices, the hook vocabulary."""
