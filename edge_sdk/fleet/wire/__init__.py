"""What the device and the operator share: protocol messages, deployment manifests, chunked transfer, signing, the version policy, artifact files and broker files."""
