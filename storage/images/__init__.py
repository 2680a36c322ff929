"""Images in: sources that list encoded images on the client and read them on the workers,
and decoding to the arrays a descriptor works on."""
