// A bucket and its entries, the entries naming the bucket by its name attribute.
resource "jetstream_kv_bucket" "test" {
  name    = local.config_name
  history = 3
  ttl     = var.retention_days * 86400
}

resource "jetstream_kv_entry" "flags" {
  bucket = jetstream_kv_bucket.test.name
  key    = "feature.flags"
  value  = "on"
}
