"""The built-in data sets' readers: numpy arrays a worker trains from, loaded inside the
workers; what a data set declares is :class:`dlscale.contract.datasets.DatasetSpec`,
registered in :mod:`dlscale.datasets.plugin`."""
