"""The commands' work from start to end, as functions of what was asked: plan, choose a runner,
build or test the cells, re-test kept wheels, bring the index up to date, and the exit status.
The CLI parses arguments into a request and renders what comes back (ui/); nothing here prints."""
