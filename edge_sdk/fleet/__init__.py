"""Fleet control: signed deployment manifests, the device's artifact store and chunked transfers."""
