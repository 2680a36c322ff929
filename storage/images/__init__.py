"""Images in: sources that list encoded images on the client and read them on the workers,
and decoding to the arrays a descriptor works on.

- `sources`: `open_image_source` recognises what a user names; `read_partition` runs on a worker.
- `source_types`: `ImageSource`, `ImagePartition`, `EncodedImage`, `IMAGE_EXTENSIONS`.
- One module per kind of source: `files` (folders and list files), `shards` (WebDataset tar
  shards, with `braces` expanding their names), `parquet_images` (image bytes in parquet).
- `decode`: `decode_image`, `ImageRequest`, `ImageRejected`.
- `listing`: each local image file's size and time as an ingest saw them, kept in the store, to
  find files changed or deleted since.
"""
