// Streams and consumers referring to each other by any attribute, across files.
resource "jetstream_stream" "orders" {
  name        = "ORDERS"
  subjects    = local.subjects
  max_age     = local.max_age
  description = "Orders of ${var.env}"
}

resource "jetstream_stream" "archive" {
  name    = "${jetstream_stream.orders.name}_ARCHIVE"
  max_age = jetstream_stream.orders.max_age * 4
  source {
    name = jetstream_stream.orders.name
  }
}

resource "jetstream_consumer" "new" {
  stream_id      = jetstream_stream.orders.id
  durable_name   = "NEW"
  deliver_all    = true
  filter_subject = "${local.prefix}.received"
}

resource "jetstream_consumer" "audit" {
  stream_id    = jetstream_stream.archive.name
  durable_name = "${jetstream_consumer.new.durable_name}_AUDIT"
  ack_wait     = jetstream_consumer.new.ack_wait * 2
}
