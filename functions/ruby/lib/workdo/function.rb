# frozen_string_literal: true

# Write a workdo step function in Ruby:
#
#   require "workdo/function"
#   include Workdo::Function::Results
#
#   Workdo::Function.step do |event|
#     completed(note: "ok", properties: { "seen" => event.object })
#   end
#
# The same script is an exec function (one event on stdin, one result on stdout) and a warm one
# (WORKDO_MODE=warm: one event per line, one result per line, each carrying its event's call
# back). The protocol is in functions/README.md; the types mirror functions/sdk/src/protocol.rs.

require_relative "function/version"
require_relative "function/protocol"
require_relative "function/runner"
require_relative "function/job"

module Workdo
  module Function
    # The result helpers as Workdo::Function.completed(...) etc. too.
    extend Results
    class << self
      public :completed, :failed, :error, :defer, :skipped, :intermediate
    end
  end
end
