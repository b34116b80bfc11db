"""What every floor shares and none owns: configuration errors and value checks (``common.checks``) and the numeric
kernels the policies run on (``common.kernels``). It imports nothing of the project."""
