"""imgscale: image classifiers trained from feature vectors streamed from zarr through Dask."""

# The layers live in the repository's top-level folders (storage/, pipeline/, jobs/, bench/) and
# are installed under this package by pyproject's package-dir mapping. Extending the path lets a
# regular install still be found when this folder is shadowed by a checkout on sys.path.
__path__ = __import__("pkgutil").extend_path(__path__, __name__)
