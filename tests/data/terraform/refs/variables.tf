// Inputs with defaults, and locals built from them (Terraform evaluates both before
// any resource): what a module's variables.tf / locals.tf usually hold.
variable "env" {
  type        = string
  description = "The environment these streams serve"
  default     = "prod"
}

variable "retention_days" {
  type    = number
  default = 7
}

locals {
  prefix      = "orders"
  subjects    = ["${local.prefix}.*", "${local.prefix}.${var.env}.>"]
  max_age     = var.retention_days * 24 * 60 * 60
  config_name = "config-${var.env}"
}
