#!/usr/bin/env ruby
# frozen_string_literal: true

# A robot in lyber-core's style (https://github.com/sul-dlss/lyber-core), run as a workdo
# function without Sidekiq or the workflow service:
#
#   steps:
#     - name: shelve
#       statuses: [noop]
#       function: { warm: ruby -I functions/ruby/lib functions/ruby/examples/lyber_robot.rb, pool: 2 }
#
# With the lyber-core gem the robot would `require "lyber_core"`; the stand-ins below have the
# part of LyberCore::Robot and LyberCore::ReturnState the adapter relies on, so the example runs
# with Ruby's standard library alone.

require "workdo/function"

unless defined?(LyberCore::Robot)
  module LyberCore
    # As lyber-core's: a status (completed, skipped or noop) and a note.
    class ReturnState
      attr_reader :status, :note

      def initialize(status: "completed", note: "")
        @status = status
        @note = note
      end
    end

    # As lyber-core's, less the workflow service: perform(druid) sets @druid and calls
    # perform_work; the workdo adapter does the first part itself and calls perform_work.
    class Robot
      attr_reader :workflow_name, :process, :druid, :retriable_exceptions

      def initialize(workflow_name, process, retriable_exceptions: [])
        @workflow_name = workflow_name
        @process = process
        @retriable_exceptions = retriable_exceptions
      end

      def bare_druid
        druid.delete_prefix("druid:")
      end
    end
  end
end

module Robots
  # Shelves an object: what it does is decided by the druid, for the tests.
  class Shelve < LyberCore::Robot
    def initialize
      super("accessionWF", "shelve", retriable_exceptions: [IOError])
    end

    def perform_work
      case bare_druid
      when /\Askip/ then LyberCore::ReturnState.new(status: "skipped", note: "nothing to shelve")
      when /\Anoop/ then LyberCore::ReturnState.new(status: "noop", note: "shelving handed to another service")
      when /\Aio/ then raise IOError, "the stacks are not mounted"
      when /\Abad/ then raise "no content metadata for #{druid}"
      when /\Aplain/ then true
      else
        logger.info("shelving #{druid}")
        puts "a robot's puts goes to stderr"
        LyberCore::ReturnState.new(status: "completed", note: "shelved #{bare_druid}")
      end
    end
  end
end

Workdo::Function.run_job(Robots::Shelve, thread_safe: true, workers: 2) if $PROGRAM_NAME == __FILE__
