#!/usr/bin/env ruby
# frozen_string_literal: true

# A step function that answers what the object asks for, to test the SDK end to end.
#
# Object property "want": "completed" (the default), "failed" (retryable), "failed_final" (not
# retryable), "defer" ("defer_seconds", default 3600), "skipped", "raise" (an exception),
# "print" (puts to stdout, which must not reach the protocol, then completes). "sleep_ms" sleeps
# first. Thread-safe: pipelined events run four at a time.
#
#   ruby -I functions/ruby/lib functions/ruby/examples/sdk_kinds.rb

require "workdo/function"
include Workdo::Function::Results

Workdo::Function.step(thread_safe: true, workers: 4) do |event|
  props = event.properties
  sleep(props["sleep_ms"].to_f / 1000.0) if props["sleep_ms"]
  want = props.fetch("want", "completed")
  case want
  when "failed" then failed("failed as asked on attempt #{event.attempt}")
  when "failed_final" then failed("failed for good as asked", retry: false)
  when "defer" then defer(seconds: props.fetch("defer_seconds", 3600), note: "not ready, as asked")
  when "skipped" then skipped(note: "skipped as asked")
  when "raise" then boom(event.object)
  else
    if want == "print"
      puts "puts from the function, on stdout as far as it knows"
      print "print too\n"
      STDOUT.write("STDOUT.write\n")
      system("echo", "a subprocess's stdout")
    end
    completed(note: "answered #{want} for #{event.object}",
              properties: { "answered_for" => event.object, "attempt" => event.attempt })
  end
end

# Defined after the step: the step is served when the script has been read to its end.
def boom(what)
  raise ArgumentError, "asked to raise for #{what}"
end
