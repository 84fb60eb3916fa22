# frozen_string_literal: true

require_relative "lib/workdo/function/version"

Gem::Specification.new do |s|
  s.name = "workdo-function"
  s.version = Workdo::Function::VERSION
  s.summary = "Write workdo step functions (protocol workdo/1) in Ruby: exec and warm modes"
  s.description = "A workdo step function as a block or a job class (Sidekiq-style perform(druid), " \
                  "or lyber-core's perform_work): one JSON event in, one JSON result out, in exec " \
                  "mode or as a long-lived warm process. Standard library only."
  s.authors = ["workdo"]
  s.license = "Apache-2.0"
  s.files = Dir.glob(["lib/**/*.rb", "README.md"], base: __dir__).sort
  s.require_paths = ["lib"]
  s.required_ruby_version = ">= 2.7"
  s.metadata["rubygems_mfa_required"] = "true"
end
