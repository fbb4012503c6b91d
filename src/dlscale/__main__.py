from dlscale.start import entry

entry()
