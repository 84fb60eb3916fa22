# frozen_string_literal: true

module Workdo
  module Function
    VERSION = "0.1.0"
    # The protocol these functions speak (functions/README.md).
    PROTOCOL = "workdo/1"
  end
end
