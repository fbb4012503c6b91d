from dlscale.cli import entry

entry()
